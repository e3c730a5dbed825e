"""Where data rests: objects and the arrival queue.

The object store (a local folder or S3), the arrival queue (a table or SQS), dataset file
formats and bounded reading of dataset files.
"""
