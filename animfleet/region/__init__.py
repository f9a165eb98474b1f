"""The one owner of a region's Redis keys: job records, worker heartbeats, the webhook outbox."""
