"""Transport: listening sockets as services, and ports that never log a peer address."""
