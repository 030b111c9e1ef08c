"""PySpark analytics over mq: the ``format("mq")`` data source and the consumer-lag job.

Nothing here is imported by the rest of mq but the entry points (``mq analytics``, the
lab), and nothing here imports PySpark until it is used: ``mq.analytics.source`` is the
data source, ``mq.analytics.session`` builds a SparkSession, ``mq.analytics.lag_job`` is
``mq analytics lag``. Install with ``pip install 'mq[spark]'`` (Java 17+ on the PATH).
"""
