"""Vocabulary shared by every layer (stdlib only)."""

from mq.core.clock import Clock, ManualClock, SystemClock
from mq.core.config import BrokerConfig, TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.core.types import TopicPartition

__all__ = ["BrokerConfig", "Clock", "ErrorCode", "ManualClock", "MqError", "Rng", "SystemClock",
           "TopicConfig", "TopicPartition"]
