"""Conversations: what the router keeps of each between its turns (_state) and where (_store: in this
process, or in Redis for several processes), what moving one to another endpoint costs (_switch),
the previous turn as evidence (_evidence), and the router's reading and writing of it (_keeper).
Public names are exported from `serving`."""
