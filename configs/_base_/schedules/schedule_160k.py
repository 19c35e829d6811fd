# 160k iterations, poly decay (power 1.0, to 1e-4), evaluation and checkpoints every 16k (stock
# mmseg).
_base_ = 'mmseg::_base_/schedules/schedule_160k.py'
