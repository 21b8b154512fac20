"""The run folder's files: their paths, Arrow schemas, the records they hold, and the readers and
writers of them."""
