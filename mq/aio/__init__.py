"""The asyncio shell: sockets, timers and files around the sans-IO broker."""
