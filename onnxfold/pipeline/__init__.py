"""``optimize``: the options' passes in order, the report and what it is built from."""
