"""GPU workers: the Celery app, the animate job's lifecycle, the model pipeline, MP4 encoding."""
