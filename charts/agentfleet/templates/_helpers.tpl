{{- define "agentfleet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "agentfleet.labels" -}}
app.kubernetes.io/name: agentfleet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "agentfleet.selectorLabels" -}}
app.kubernetes.io/name: agentfleet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agentfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "agentfleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "agentfleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "agentfleet.gatewaySelectorLabels" -}}
app.kubernetes.io/name: agentfleet-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agentfleet.gatewayLabels" -}}
{{ include "agentfleet.gatewaySelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "agentfleet.gatewayTokensSecret" -}}
{{- default (printf "%s-gateway-tokens" (include "agentfleet.fullname" .)) .Values.gateway.existingSecret -}}
{{- end -}}

{{- define "agentfleet.redisName" -}}
{{- printf "%s-redis" (include "agentfleet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agentfleet.redisSelectorLabels" -}}
app.kubernetes.io/name: agentfleet-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The workers' Redis URL is written by the operator beside each worker (the chart's own Redis, whose URL carries its password, and no Secret named for the workers). */}}
{{- define "agentfleet.workerRedisManaged" -}}
{{- if and .Values.redis.deploy (not .Values.worker.redisSecret.name) -}}true{{- end -}}
{{- end -}}

{{/* AGENTFLEET_REDIS_URL of the operator and the gateway: the chart's Redis, an existing Secret, or the URL inline. */}}
{{- define "agentfleet.redisUrlEnv" -}}
- name: AGENTFLEET_REDIS_URL
{{- if .Values.redis.deploy }}
  valueFrom:
    secretKeyRef:
      name: {{ include "agentfleet.redisName" . }}
      key: url
{{- else if .Values.redis.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.existingSecretKey }}
{{- else }}
  value: {{ required "redis.url is required when redis.deploy is false and redis.existingSecret is empty" .Values.redis.url | quote }}
{{- end }}
{{- end -}}

{{/* The Secret of the archive's credentials loaded into the operator: yours, the chart's (from archive.credentials), or none. */}}
{{- define "agentfleet.archiveSecret" -}}
{{- if .Values.archive.url -}}
{{- if .Values.archive.existingSecret -}}
{{- .Values.archive.existingSecret -}}
{{- else if .Values.archive.credentials -}}
{{- printf "%s-archive" (include "agentfleet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The operator writes Secrets beside each worker: the chart's Redis URL, the archive's environment. */}}
{{- define "agentfleet.writesWorkerSecrets" -}}
{{- if or (include "agentfleet.workerRedisManaged" .) .Values.archive.url -}}true{{- end -}}
{{- end -}}
