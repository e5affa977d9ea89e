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
