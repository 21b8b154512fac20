"""How each API's answer is read: SSE framing, each API's events and bodies, the token counts."""
