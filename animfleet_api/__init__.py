"""The HTTP API's job request, stated once: its bounds (:mod:`~animfleet_api.bounds`), its
fields with their error messages (:mod:`~animfleet_api.fields`) and its bodies
(:mod:`~animfleet_api.request`).

The gateway serves these bodies, the dispatcher validates with these fields and the SDK exports
these types. It imports pydantic and nothing of the fleet, so the SDK can ship it alone.
"""
