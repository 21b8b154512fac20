"""The endpoint before the load: pre-flight checks, the tokenizer's source, the prefix cache's
state, and what the run ran on."""
