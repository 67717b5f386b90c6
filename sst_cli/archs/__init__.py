"""The networks sst-cli runs, one room per architecture, and the attention kernels they share."""
