//! sm_80 mainloop (to come).
