"""The command line: a typer app whose commands each call one library function."""

from codesign.cli.app import app, main

__all__ = ["app", "main"]
