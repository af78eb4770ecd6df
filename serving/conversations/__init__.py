"""Conversations: what the router keeps of each conversation between its turns (_state), where it
keeps it (_store: in this process, or in Redis for several processes) and what moving a
conversation to another endpoint costs (_switch: re-reading its history). Public names are
exported from `serving`."""
