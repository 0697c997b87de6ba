"""mux's updater: `mux update`, `mux version` and `mux server`."""

__version__ = "0.1.0"
