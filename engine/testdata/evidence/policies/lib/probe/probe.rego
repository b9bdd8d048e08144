package lib.probe

too_long(name) if count(name) > data.lib.probe.max_name

vip if input.account.vip == true
