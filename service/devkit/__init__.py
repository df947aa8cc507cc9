"""devkit"""
