"""Textual themes and stylesheets for the kernelrl TUI.
Colours live here; screens and widgets refer to theme variables only."""
