"""What a run streams into its folder while it goes on, in numbered parts sealed at its end:
the requests and their chunks, the engine's steps, the probes' samples."""
