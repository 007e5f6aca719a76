"""The wheel's build hook (hatchling, pyproject.toml): the dashboard's files that are not in a package (app.py, its
Streamlit settings, the metrics page it reads) go into aniso/_workbench/ beside core/, ui/ and pages/. Only in the
wheel of `pip install .`: `pip install -e .` puts the checkout itself on sys.path, and these files stay in it."""

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

TREE_FILES = ("app.py", ".streamlit/config.toml", "docs/metrics.md")


class WorkbenchFiles(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        if self.target_name == "wheel" and version == "standard":
            for name in TREE_FILES:
                build_data["force_include"][name] = f"aniso/_workbench/{name}"
