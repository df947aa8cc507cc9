"""Real architectures from torchvision, timm and transformers in small configurations, random weights."""
