"""A bundle on disk: its manifest (_manifest), reading and verifying it (_bundle), signatures
(_signing), downloads (_download) and hot swaps (_watcher). Public names are exported from `serving`."""
