# tests for launcher/
