"""What is sent: workload types, prompts of exact token lengths, files, arrival schedules."""
