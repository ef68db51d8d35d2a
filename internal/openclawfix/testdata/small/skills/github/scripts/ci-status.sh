#!/bin/sh
set -eu
gh run list --limit 5 --json status,conclusion,name
