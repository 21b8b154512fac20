"""Agent sessions: turns with tools, tool results and delays, replayed from a JSONL trace
(``trace``) or generated from distributions (``generate``), planned as requests whose history
grows turn by turn (``plan``) and rebuilt at send time from the server's tool calls
(``history``)."""
