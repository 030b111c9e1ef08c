"""Geo-replication service (a pure client of mq); arrives in a later issue."""
