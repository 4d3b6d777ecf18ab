"""The plug-in form of `shims.verl_imports`: importing it installs the hook that serves verl's
module names by rlbridge's (where verl is not installed). The start-up check of the files a config
names adds it to `trainer.v1.plugins` when they use such names, so that every process that loads
them (the driver, each agent-loop worker) imports it before it loads any user code."""

from shims.verl_imports import install

install()
