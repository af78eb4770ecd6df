"""What the router records and watches: the outcome log (_outcome_log), learning from traffic (_traffic),
drift (_drift) and OpenTelemetry traces and metrics (_telemetry). Public names are exported from `serving`."""
