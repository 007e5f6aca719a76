"""The one exception type that carries a message meant for a person (CLI and UI show it as is)."""


class InputError(ValueError):
    """Bad user input: unknown model or corpus, unreadable file, missing column, empty corpus..."""


class Cancelled(RuntimeError):
    """The user cancelled a running extraction; nothing partial was stored."""
