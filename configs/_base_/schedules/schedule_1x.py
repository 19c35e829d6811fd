# 12 epochs, lr x0.1 at epochs 8 and 11, linear warm-up over 500 iterations (stock mmdet 1x).
_base_ = 'mmdet::_base_/schedules/schedule_1x.py'
