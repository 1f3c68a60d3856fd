"""Process plumbing: forks, the private data directory, bounded memos."""
