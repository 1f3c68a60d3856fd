"""The guards that refuse look-alike questions, and their word lists."""
