"""The console's widgets, grouped by the screen area they fill."""
