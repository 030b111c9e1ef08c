"""mq: a Kafka-class event streaming platform in Python."""
__version__ = "0.1.0"
