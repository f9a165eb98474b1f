"""``make loadtest``: a local 3-region fleet with the model stand-in under a locust spike."""
