"""The typer CLI: parse options, call the library, render with rich. No logic lives here."""
