"""The browser tests share the server and browser fixtures of test_default_flow (one server per module)."""

from tests.browser.test_default_flow import browser, server  # noqa: F401
