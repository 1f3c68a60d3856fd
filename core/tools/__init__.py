"""Tools built on the library: the CLI, the demo, pair evaluation and calibration."""
