"""The client's connections: the raw HTTP/1.1 pool, the kernel's receive stamps on its sockets
and their clock, and the httpx path's connection slots."""
