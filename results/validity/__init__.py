"""Whether a run can be trusted and used: validity, usability, token reconciliation, an early
end."""
