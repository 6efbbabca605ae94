"""The real world: site event loop, framed TCP transport, the driver-side host."""
