"""One broker node, sans-IO: handlers for every API over the metadata image and logs.

``mq.broker.config_doc`` renders docs/reference/configs.md (run it with ``python -m``).
"""

from mq.broker.node import BrokerNode, Pending

__all__ = ["BrokerNode", "Pending"]
