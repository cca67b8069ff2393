#!/bin/sh
# Runs a command and prints its exit status last. ctest judges a test with a
# PASS_REGULAR_EXPRESSION by its output alone, ignoring the exit code, so the
# example tests require "exit status 0" at the end of the output: an example
# that prints its last line and then crashes fails.
"$@"
status=$?
echo "exit status $status"
exit $status
