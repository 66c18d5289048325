"""The faces of kernelrl: the Textual TUI and the typer CLI `krl`.
Nothing imports app."""
