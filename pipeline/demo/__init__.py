"""The demo `customer-churn` model (definition, synthetic rows) and the demo files made for it."""
