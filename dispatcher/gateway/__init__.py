"""The HTTP gateway: the job API for web backends in any language."""

from dispatcher.gateway.app import create_app, run_gateway
from dispatcher.gateway.settings import GatewaySettings

__all__ = ["GatewaySettings", "create_app", "run_gateway"]
