"""The semantic tier: embedders, the vector index, the guards, the audit log."""
