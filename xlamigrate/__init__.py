"""xlamigrate: migrate Torch-XLA code off the deprecated XLA_USE_BF16 / XLA_DOWNCAST_BF16 flags."""

__version__ = "0.1.0"
