"""Running a load plan: in this process, over worker processes, or under Locust."""
