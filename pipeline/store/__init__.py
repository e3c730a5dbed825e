"""Where data rests: objects, the arrival queue, and dataset file formats and reading.

The object store (a local folder or S3), the arrival queue (a table or SQS), and dataset file
formats and reading, bounded so a file's own claims about its size are checked, not trusted.
"""
