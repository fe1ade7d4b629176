"""The controller: kopf handlers feed a state, one loop runs the core and applies its decisions."""
