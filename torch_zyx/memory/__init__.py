"""Memory pools and events: the last stage of the flow, where buffers live (DESIGN.md "Backends")."""
