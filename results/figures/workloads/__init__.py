"""The figures of workloads beyond plain text: the tool calls the answers made (``tool_calls``)."""
