"""The demo models (`customer-churn`, a definition file; `loan-default`, an owner's folder with
its training code) and the demo files made for them."""

from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent
