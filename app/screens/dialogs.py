"""Small modal dialogs: yes/no confirmation and a one-line prompt. They return their answer via dismiss()."""

from __future__ import annotations

from typing import Optional

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "Yes", id="confirm.yes"),
                Binding("n,escape", "answer(False)", "No", id="confirm.no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="dialog-question")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class PromptScreen(ModalScreen[Optional[str]]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(self, question: str, placeholder: str = "", value: str = "") -> None:
        super().__init__()
        self.question, self.placeholder, self.value = question, placeholder, value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="dialog-question")
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class PickScreen(ModalScreen[Optional[str]]):
    """Choose one of a list (enter), or cancel (esc): for names the user should pick, not type."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="pick.cancel")]

    def __init__(self, question: str, choices: list[tuple[str, str]]) -> None:
        """choices: (label shown, value returned)."""
        super().__init__()
        self.question, self.choices = question, choices

    def compose(self) -> ComposeResult:
        from textual.widgets import OptionList
        from textual.widgets.option_list import Option

        with Vertical(classes="dialog"):
            yield Static(self.question, classes="dialog-question")
            yield OptionList(*(Option(label, id=value) for label, value in self.choices), id="pick-list")

    def on_option_list_option_selected(self, event) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class TextScreen(ModalScreen[None]):
    """A long text to read and copy from (a read-only text area: select with the mouse or shift+arrows); esc closes."""

    BINDINGS = [Binding("escape,q", "close", "Close", id="text.close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text, self.text = title, text

    def compose(self) -> ComposeResult:
        from textual.widgets import TextArea

        with Vertical(classes="dialog text-dialog"):
            yield Static(self.title_text, classes="dialog-question")
            yield TextArea(self.text, read_only=True, soft_wrap=True, id="text-body")

    def action_close(self) -> None:
        self.dismiss(None)
